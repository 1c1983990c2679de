package label

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"sync"
	"time"
)

// Options configure a Session.
type Options struct {
	// Samples are the sample files to label (package sample's records, or
	// any JSONL with a "text").
	Samples []string
	// Out is the labels file, created if need be (mode 0600), resumed if
	// it holds labels; PATH.unsure beside it holds the "not sure" marks.
	Out string
	// Classes are the labels offered: the heads' classes. "other" is
	// added when they lack it.
	Classes []string
	// Source is each label's source column. Default "traffic".
	Source string
	// Margin is the half-width of the 95% interval of the route
	// precision the stopping hint aims for. Default 0.03.
	Margin float64
	// Now is the clock; nil: time.Now.
	Now func() time.Time
}

// Other is the class of a prompt no specialised class fits.
const Other = "other"

// Session is one labelling session over a sample.
type Session struct {
	o       Options
	classes []string
	keys    map[string]string // class → its key on the page
	items   []Item
	byID    map[string]int
	read    Read

	mu       sync.Mutex
	labels   *file
	unsure   *file
	labelled map[string]string // id → label
	foreign  int               // labels of ids the sample does not hold
	notSure  map[string]bool
	skipped  []string // ids skipped in this session, in order
	queue    []int    // items not yet labelled, not sure or skipped, in order
	done     []mark   // labels and marks, most recent last: what undo undoes
	closed   bool
}

// mark is a label, a "not sure" or a skip, as undo sees it.
type mark struct {
	kind string // "label", "unsure", "skip"
	id   string
	off  int64 // where its line starts in its file
}

// ErrLocked: another process is labelling into the same file.
var ErrLocked = errors.New("another triage label is writing this labels file")

// ErrStale is the answer to an action on an item that is not the one
// shown (a second tab, a repeated key): nothing was changed.
var ErrStale = errors.New("that prompt is no longer the one shown")

// Open reads the samples and the labels file, takes the labels file's
// lock, and returns the session, resumed where the labels file stopped.
func Open(o Options) (*Session, error) {
	if o.Out == "" {
		return nil, errors.New("no labels file to write (the output path)")
	}
	if len(o.Samples) == 0 {
		return nil, errors.New("no sample file to label")
	}
	if o.Source == "" {
		o.Source = "traffic"
	}
	if o.Margin == 0 {
		o.Margin = 0.03
	}
	if !(o.Margin > 0 && o.Margin < 0.5) {
		return nil, fmt.Errorf("margin %v: want a half-width above 0 and below 0.5", o.Margin)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	s := &Session{o: o, byID: map[string]int{}, labelled: map[string]string{}, notSure: map[string]bool{}}
	if err := s.setClasses(o.Classes); err != nil {
		return nil, err
	}
	items, rd, err := ReadSamples(o.Samples...)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return nil, fmt.Errorf("%v: no prompts to label (%d records, %d with empty text)", o.Samples, rd.Records, rd.Empty)
	}
	s.items, s.read = items, rd
	for i := range items {
		s.byID[items[i].ID] = i
	}
	if s.labels, err = openFile(o.Out); err != nil {
		return nil, err
	}
	if err := lock(s.labels.f); err != nil {
		s.labels.close()
		if errors.Is(err, errLocked) {
			return nil, fmt.Errorf("%s: %w (stop the other one first)", o.Out, ErrLocked)
		}
		return nil, fmt.Errorf("%s: lock: %w", o.Out, err)
	}
	if s.unsure, err = openFile(o.Out + ".unsure"); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.resume(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (s *Session) setClasses(classes []string) error {
	if len(classes) == 0 {
		return errors.New("no classes to label with (give the heads, or the classes)")
	}
	seen := map[string]bool{}
	for _, c := range classes {
		switch {
		case c == "":
			return errors.New("an empty class name")
		case seen[c]:
			return fmt.Errorf("class %q given twice", c)
		}
		seen[c] = true
		s.classes = append(s.classes, c)
	}
	if !seen[Other] {
		s.classes = append(s.classes, Other)
	}
	s.keys = assignKeys(s.classes)
	return nil
}

// Keys a class may get, in order: "other" has o; u, s, n and z are
// undo, skip, not sure and undo again.
const classKeys = "1234567890qwertyipadfghjklxcvbm"

func assignKeys(classes []string) map[string]string {
	keys := map[string]string{}
	i := 0
	for _, c := range classes {
		if c == Other {
			keys[c] = "o"
			continue
		}
		if i < len(classKeys) {
			keys[c] = classKeys[i : i+1]
			i++
		}
	}
	return keys
}

// resume reads what the labels files hold: labels (checked against the
// classes, one per item) and "not sure" marks, and rebuilds undo's list.
func (s *Session) resume() error {
	known := map[string]int{} // id → line
	var marks []struct {
		m  mark
		at time.Time
	}
	var problems []error
	cut, err := s.labels.read(func(n int, line []byte, _ int64) error {
		var l Labelled
		if err := json.Unmarshal(line, &l); err != nil {
			problems = append(problems, fmt.Errorf("%s:%d: not a label: %v", s.o.Out, n, err))
			return nil
		}
		switch {
		case !slices.Contains(s.classes, l.Label):
			problems = append(problems, fmt.Errorf("%s:%d: label %q is not one of the classes %v", s.o.Out, n, l.Label, s.classes))
			return nil
		case l.ID == "":
			l.ID = TextID(l.Text)
		}
		if prev, dup := known[l.ID]; dup {
			problems = append(problems, fmt.Errorf("%s:%d: prompt %s is labelled again (first on line %d)", s.o.Out, n, l.ID, prev))
			return nil
		}
		known[l.ID] = n
		s.labelled[l.ID] = l.Label
		if _, ok := s.byID[l.ID]; !ok {
			s.foreign++
		}
		marks = append(marks, struct {
			m  mark
			at time.Time
		}{mark{kind: "label", id: l.ID}, l.At})
		return nil
	})
	if err != nil {
		return err
	}
	if len(problems) > 0 {
		return errors.Join(problems...)
	}
	_ = cut // a label the process died writing was never acknowledged
	if _, err := s.unsure.read(func(n int, line []byte, _ int64) error {
		var u unsureLine
		if err := json.Unmarshal(line, &u); err != nil || u.ID == "" {
			return fmt.Errorf("%s.unsure:%d: not a mark", s.o.Out, n)
		}
		if _, labelled := s.labelled[u.ID]; !labelled && !s.notSure[u.ID] {
			s.notSure[u.ID] = true
			marks = append(marks, struct {
				m  mark
				at time.Time
			}{mark{kind: "unsure", id: u.ID}, u.At})
		}
		return nil
	}); err != nil {
		return err
	}
	// Undo's list: labels and marks in the order they were made, each
	// with where its line starts (files are read in order, so a line's
	// start is the previous line's end).
	sort.SliceStable(marks, func(i, j int) bool { return marks[i].at.Before(marks[j].at) })
	if err := s.lineStarts(marks); err != nil {
		return err
	}
	for _, m := range marks {
		s.done = append(s.done, m.m)
	}
	for i := range s.items {
		id := s.items[i].ID
		if _, ok := s.labelled[id]; !ok && !s.notSure[id] {
			s.queue = append(s.queue, i)
		}
	}
	return nil
}

// lineStarts fills each mark's offset from its file.
func (s *Session) lineStarts(marks []struct {
	m  mark
	at time.Time
}) error {
	starts := map[string]int64{}
	for _, f := range []struct {
		w    *file
		kind string
	}{{s.labels, "label"}, {s.unsure, "unsure"}} {
		var prev int64
		if _, err := f.w.read(func(_ int, line []byte, end int64) error {
			var v struct {
				ID, Text string
			}
			_ = json.Unmarshal(line, &v)
			if v.ID == "" {
				v.ID = TextID(v.Text)
			}
			if _, ok := starts[f.kind+v.ID]; !ok {
				starts[f.kind+v.ID] = prev
			}
			prev = end
			return nil
		}); err != nil {
			return err
		}
	}
	for i := range marks {
		marks[i].m.off = starts[marks[i].m.kind+marks[i].m.id]
	}
	return nil
}

// ReadInfo is what reading the sample found besides its prompts.
func (s *Session) ReadInfo() Read { return s.read }

// Close releases the labels file and its lock.
func (s *Session) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var errs []error
	if s.unsure != nil {
		errs = append(errs, s.unsure.close())
	}
	if s.labels != nil {
		lockMu.Lock()
		if p, ok := lockFiles[s.labels.f]; ok {
			os.Remove(p)
			delete(lockFiles, s.labels.f)
		}
		lockMu.Unlock()
		errs = append(errs, s.labels.close())
	}
	return errors.Join(errs...)
}

// current is the item shown: the queue's head, else the first skipped.
func (s *Session) current() (int, bool) {
	if len(s.queue) > 0 {
		return s.queue[0], true
	}
	for _, id := range s.skipped {
		return s.byID[id], true
	}
	return 0, false
}

// Label records label for the item shown, whose id is id: one line
// appended to the labels file and synced before it returns.
func (s *Session) Label(id, label string) error {
	if !slices.Contains(s.classes, label) {
		return fmt.Errorf("label %q is not one of the classes %v", label, s.classes)
	}
	return s.act(id, func(it *Item) (mark, error) {
		off, err := s.labels.append(Labelled{Text: it.Text, Label: label, Source: s.o.Source, ID: it.ID, At: s.o.Now().UTC()})
		if err != nil {
			return mark{}, err
		}
		s.labelled[it.ID] = label
		return mark{kind: "label", id: it.ID, off: off}, nil
	})
}

// Unsure marks the item shown as one the labeller cannot decide: it is
// not asked again, and not labelled.
func (s *Session) Unsure(id string) error {
	return s.act(id, func(it *Item) (mark, error) {
		off, err := s.unsure.append(unsureLine{ID: it.ID, At: s.o.Now().UTC()})
		if err != nil {
			return mark{}, err
		}
		s.notSure[it.ID] = true
		return mark{kind: "unsure", id: it.ID, off: off}, nil
	})
}

// Skip puts the item shown aside for now: it comes back after the others
// (and in the next session).
func (s *Session) Skip(id string) error {
	return s.act(id, func(it *Item) (mark, error) {
		s.skipped = append(s.skipped, it.ID)
		return mark{kind: "skip", id: it.ID}, nil
	})
}

func (s *Session) act(id string, do func(*Item) (mark, error)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("the session is closed")
	}
	i, ok := s.current()
	if !ok || s.items[i].ID != id {
		return ErrStale
	}
	m, err := do(&s.items[i])
	if err != nil {
		return err
	}
	if len(s.queue) > 0 && s.queue[0] == i {
		s.queue = s.queue[1:]
	} else { // shown from the skipped ones: out of them, or to their back
		s.skipped = slices.DeleteFunc(s.skipped, func(x string) bool { return x == id })
		if m.kind == "skip" {
			s.skipped = append(s.skipped, id)
		}
	}
	s.done = append(s.done, m)
	return nil
}

// Pending are the items not yet labelled or marked not sure, in the
// order the page would show them.
func (s *Session) Pending() []Item {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Item, len(s.queue))
	for k, i := range s.queue {
		out[k] = s.items[i]
	}
	return out
}

// Record writes a label, or a "not sure" mark when label is "", that
// labeller (not a person on the page: "model:POOL") gave the pending
// item id, synced before it returns; it is not undone by Undo's list of
// the page's own actions. An item already labelled or marked is refused
// (ErrStale).
func (s *Session) Record(id, label, labeller string) error {
	if label != "" && !slices.Contains(s.classes, label) {
		return fmt.Errorf("label %q is not one of the classes %v", label, s.classes)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("the session is closed")
	}
	i, ok := s.byID[id]
	k := slices.Index(s.queue, i)
	if !ok || k < 0 {
		return ErrStale
	}
	it := &s.items[i]
	if label == "" {
		if _, err := s.unsure.append(unsureLine{ID: it.ID, At: s.o.Now().UTC(), Labeller: labeller}); err != nil {
			return err
		}
		s.notSure[it.ID] = true
	} else {
		if _, err := s.labels.append(Labelled{Text: it.Text, Label: label, Source: s.o.Source, ID: it.ID, At: s.o.Now().UTC(), Labeller: labeller}); err != nil {
			return err
		}
		s.labelled[it.ID] = label
	}
	s.queue = slices.Delete(s.queue, k, k+1)
	return nil
}

// Undo takes back the last label, "not sure" or skip, and shows its
// item again. False when there is nothing to undo.
func (s *Session) Undo() (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.done) == 0 || s.closed {
		return false, nil
	}
	m := s.done[len(s.done)-1]
	switch m.kind {
	case "label":
		if err := s.labels.truncate(m.off); err != nil {
			return false, err
		}
		delete(s.labelled, m.id)
	case "unsure":
		if err := s.unsure.truncate(m.off); err != nil {
			return false, err
		}
		delete(s.notSure, m.id)
	case "skip":
		if k := slices.Index(s.skipped, m.id); k >= 0 {
			s.skipped = slices.Delete(s.skipped, k, k+1)
		}
	}
	s.done = s.done[:len(s.done)-1]
	if i, ok := s.byID[m.id]; ok {
		s.queue = slices.Insert(s.queue, 0, i)
	} else if m.kind == "label" {
		s.foreign--
	}
	return true, nil
}

// Classes are the labels offered ("other" among them).
func (s *Session) Classes() []string { return slices.Clone(s.classes) }
