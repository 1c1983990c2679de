package label

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/triagegw/triage/internal/testenv"
)

// cdp is a client of the Chrome DevTools protocol on one page: commands
// and their results, and the events the page sends.
type cdp struct {
	ws     *websocket.Conn
	mu     sync.Mutex
	next   int
	wait   map[int]chan cdpMsg
	events chan cdpMsg
}

type cdpMsg struct {
	ID     int             `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Message string `json:"message"`
	} `json:"error"`
}

func dialCDP(ctx context.Context, t *testing.T, url string) *cdp {
	ws, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		t.Fatalf("devtools %s: %v", url, err)
	}
	ws.SetReadLimit(32 << 20)
	c := &cdp{ws: ws, wait: map[int]chan cdpMsg{}, events: make(chan cdpMsg, 256)}
	go func() {
		for {
			_, b, err := ws.Read(ctx)
			if err != nil {
				close(c.events)
				return
			}
			var m cdpMsg
			if json.Unmarshal(b, &m) != nil {
				continue
			}
			if m.ID == 0 {
				select {
				case c.events <- m:
				default: // nobody waits for this many events
				}
				continue
			}
			c.mu.Lock()
			ch := c.wait[m.ID]
			delete(c.wait, m.ID)
			c.mu.Unlock()
			if ch != nil {
				ch <- m
			}
		}
	}()
	t.Cleanup(func() { ws.Close(websocket.StatusNormalClosure, "") })
	return c
}

// call sends a command and waits for its result.
func (c *cdp) call(ctx context.Context, method string, params any, result any) error {
	c.mu.Lock()
	c.next++
	id := c.next
	ch := make(chan cdpMsg, 1)
	c.wait[id] = ch
	c.mu.Unlock()
	b, _ := json.Marshal(map[string]any{"id": id, "method": method, "params": params})
	if err := c.ws.Write(ctx, websocket.MessageText, b); err != nil {
		return err
	}
	select {
	case m := <-ch:
		if m.Error != nil {
			return fmt.Errorf("%s: %s", method, m.Error.Message)
		}
		if result != nil {
			return json.Unmarshal(m.Result, result)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s: %w", method, ctx.Err())
	}
}

// event waits for the page's next event named method.
func (c *cdp) event(ctx context.Context, method string) error {
	for {
		select {
		case m, ok := <-c.events:
			if !ok {
				return fmt.Errorf("devtools closed waiting for %s", method)
			}
			if m.Method == method {
				return nil
			}
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", method, ctx.Err())
		}
	}
}

// eval evaluates expr in the page, awaiting it if it is a promise, and
// decodes its value into out.
func (c *cdp) eval(ctx context.Context, expr string, out any) error {
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	if err := c.call(ctx, "Runtime.evaluate", map[string]any{"expression": expr, "awaitPromise": true, "returnByValue": true}, &r); err != nil {
		return err
	}
	if e := r.ExceptionDetails; e != nil {
		return fmt.Errorf("%s: %s %s", expr, e.Text, e.Exception.Description)
	}
	if out != nil {
		return json.Unmarshal(r.Result.Value, out)
	}
	return nil
}

// key presses and releases a key as a keyboard does.
func (c *cdp) key(ctx context.Context, key string) error {
	code, vk, text := "", 0, key
	switch {
	case key == "Enter":
		code, vk, text = "Enter", 13, "\r"
	case key == "Backspace":
		code, vk, text = "Backspace", 8, ""
	case len(key) == 1 && key[0] >= '0' && key[0] <= '9':
		code, vk = "Digit"+key, int(key[0])
	case len(key) == 1 && key[0] >= 'a' && key[0] <= 'z':
		code, vk = "Key"+strings.ToUpper(key), int(key[0]-'a'+'A')
	}
	down := map[string]any{"type": "keyDown", "key": key, "code": code, "windowsVirtualKeyCode": vk, "text": text}
	if text == "" {
		down["type"] = "rawKeyDown"
		delete(down, "text")
	}
	if err := c.call(ctx, "Input.dispatchKeyEvent", down, nil); err != nil {
		return err
	}
	return c.call(ctx, "Input.dispatchKeyEvent", map[string]any{"type": "keyUp", "key": key, "code": code, "windowsVirtualKeyCode": vk}, nil)
}

// rendered waits until the page has rendered more than seq times, and
// returns its render count and the id of the prompt it shows.
func (c *cdp) rendered(ctx context.Context, seq int) (int, string, error) {
	var v struct {
		Seq  string `json:"seq"`
		Item string `json:"item"`
	}
	err := c.eval(ctx, fmt.Sprintf(`new Promise((resolve) => {
		const done = () => document.body && Number(document.body.dataset.seq || 0) > %d;
		const give = () => resolve({seq: document.body.dataset.seq, item: document.body.dataset.item});
		if (done()) return give();
		const obs = new MutationObserver(() => { if (done()) { obs.disconnect(); give(); } });
		obs.observe(document, {attributes: true, childList: true, subtree: true});
	})`, seq), &v)
	var n int
	fmt.Sscan(v.Seq, &n)
	return n, v.Item, err
}

// startChromium starts Debian's Chromium headless with the DevTools
// protocol on a free port, and returns a client of a new page.
func startChromium(ctx context.Context, t *testing.T) *cdp {
	const bin = "/usr/bin/chromium"
	if _, err := os.Stat(bin); err != nil {
		testenv.Missing(t, "chromium: "+err.Error(), "scripts/install-chromium.sh installs it")
	}
	dir := t.TempDir()
	cmd := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-extensions",
		"--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0", "--user-data-dir="+filepath.Join(dir, "profile"),
		"--window-size=1280,900", "about:blank")
	cmd.Env = append(os.Environ(), "HOME="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its helper processes too, to stop them all
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		// A helper process may still be writing into the profile as it
		// dies: the temporary directory can be removed once they stop.
		testenv.Wait(t, func() bool { return os.RemoveAll(dir) == nil }, "chromium's profile directory removed")
	})
	// Chromium says where DevTools listen on its standard error.
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "DevTools listening on "); ok {
				addr <- u
			}
		}
		io.Copy(io.Discard, stderr)
	}()
	var browser string
	select {
	case browser = <-addr:
	case <-ctx.Done():
		t.Fatal("chromium did not start its DevTools server")
	}
	host := strings.Split(strings.TrimPrefix(browser, "ws://"), "/")[0]
	req, _ := http.NewRequestWithContext(ctx, "PUT", "http://"+host+"/json/new?about:blank", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var target struct{ WebSocketDebuggerURL string }
	err = json.NewDecoder(resp.Body).Decode(&target)
	resp.Body.Close()
	if err != nil || target.WebSocketDebuggerURL == "" {
		t.Fatalf("new page: %v %+v", err, target)
	}
	c := dialCDP(ctx, t, target.WebSocketDebuggerURL)
	if err := c.call(ctx, "Page.enable", nil, nil); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestPageInChromium labels a sample as a person does, in Debian's
// Chromium: loads the page, labels with the keyboard (a class's key,
// Enter for the suggestion, not sure, skip), undoes, reloads and goes on
// where it was; the labels file holds what was pressed. It measures the
// labels a minute of a scripted session (no think time: the time from a
// key press to the next prompt on screen, the label on disk before).
func TestPageInChromium(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	const n = 40
	sp := writeSample(t, dir, texts(n), "")
	out := filepath.Join(dir, "labels.jsonl")
	s, err := Open(Options{Samples: []string{sp}, Out: out, Classes: []string{"law", "business", "health"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- Serve(sctx, ln, Handler(s, false)) }()
	defer func() {
		stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	url := "http://" + ln.Addr().String() + "/"

	// Page weight: everything the page loads.
	weight := 0
	for _, p := range []string{"", "app.js", "app.css"} {
		resp, err := http.Get(url + p)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		weight += len(b)
	}
	t.Logf("page weight %d bytes (HTML, JS and CSS)", weight)
	if weight >= 100<<10 {
		t.Errorf("page weight %d bytes, want under 100 KB", weight)
	}

	c := startChromium(ctx, t)
	if err := c.call(ctx, "Page.navigate", map[string]any{"url": url}, nil); err != nil {
		t.Fatal(err)
	}
	seq, shown, err := c.rendered(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := s.State()
	if shown != want.Item.ID {
		t.Fatalf("page shows %q, the session %q", shown, want.Item.ID)
	}
	var text string
	if err := c.eval(ctx, `document.getElementById("text").textContent`, &text); err != nil || text != want.Item.Text {
		t.Fatalf("prompt on the page = %q (%v), want %q", text, err, want.Item.Text)
	}

	// press presses key and waits for the page to show the next state.
	pressed := map[string]string{} // id → the label the keys gave it
	var busy time.Duration
	press := func(key string) string {
		t.Helper()
		t0 := time.Now()
		if err := c.key(ctx, key); err != nil {
			t.Fatal(err)
		}
		var next string
		if seq, next, err = c.rendered(ctx, seq); err != nil {
			t.Fatalf("after %q: %v", key, err)
		}
		busy += time.Since(t0)
		return next
	}
	keyOf := map[string]string{"1": "law", "2": "business", "3": "health", "o": "other", "Enter": "law"} // tier 2 suggests law first
	keys := []string{"1", "2", "Enter", "3", "o"}
	labels := 0
	for i := range 25 {
		k := keys[i%len(keys)]
		pressed[shown] = keyOf[k]
		shown = press(k)
		labels++
	}
	perMinute := float64(labels) / busy.Minutes()
	t.Logf("scripted session: %d labels in %v of key-to-next-prompt time: %.0f labels a minute, %.1f ms a label", labels, busy.Round(time.Millisecond), perMinute, busy.Seconds()*1000/float64(labels))
	if perMinute < 10 {
		t.Errorf("%.1f labels a minute with the keyboard, want at least 10", perMinute)
	}

	// Not sure, skip, then undo both: the page goes back to each.
	unsureID := shown
	shown = press("n")
	skipID := shown
	shown = press("s")
	if st := s.State(); st.Unsure != 1 || st.Skipped != 1 {
		t.Fatalf("after n and s: %d not sure, %d skipped", st.Unsure, st.Skipped)
	}
	if shown = press("u"); shown != skipID {
		t.Errorf("undo of the skip shows %s, want %s", shown, skipID)
	}
	if shown = press("Backspace"); shown != unsureID {
		t.Errorf("undo of not sure shows %s, want %s", shown, unsureID)
	}
	// Undo a label too: the last labelled prompt comes back, its line gone.
	if shown = press("u"); pressed[shown] == "" {
		t.Errorf("undo of a label shows %s, which was not labelled", shown)
	}
	delete(pressed, shown)
	if len(readLabels(t, out)) != labels-1 {
		t.Errorf("labels file has %d labels after undo, want %d", len(readLabels(t, out)), labels-1)
	}

	// Reload: the page comes back on the same prompt, with the counts.
	if err := c.call(ctx, "Page.reload", map[string]any{}, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.event(ctx, "Page.loadEventFired"); err != nil {
		t.Fatal(err)
	}
	seq = 0
	seq, again, err := c.rendered(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if again != shown {
		t.Errorf("after reload the page shows %s, want %s", again, shown)
	}
	var labelled string
	c.eval(ctx, `document.getElementById("labelled").textContent`, &labelled)
	if labelled != fmt.Sprint(labels-1) {
		t.Errorf("after reload the page counts %s labelled, want %d", labelled, labels-1)
	}
	pressed[shown] = "health"
	press("3")

	// The labels file holds exactly the labels pressed, each with its text.
	got := map[string]string{}
	for _, l := range readLabels(t, out) {
		got[l.ID] = l.Label
		if TextID(l.Text) != l.ID || l.Source != "traffic" {
			t.Errorf("label line %+v: text and id disagree, or source", l)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(pressed) {
		t.Errorf("labels file:\n%v\nkeys pressed:\n%v", got, pressed)
	}
}
