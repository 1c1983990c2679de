package sample

import (
	"regexp"
	"strings"
)

// Placeholders that replace what Redact removes.
const (
	Email = "[email]"
	Phone = "[phone]"
	Card  = "[card]"
	Key   = "[key]"
)

// Patterns, applied in this order: keys first (a JWT holds dots and a key
// may hold an @), then e-mail addresses, then numbers, card-like before
// phone-like. They lean towards redacting: a 40-digit hex hash or a
// 16-digit number in a maths question is redacted too.
var (
	// API keys and tokens with a known shape, then any long token mixing
	// letters and digits (checked in mixed, not by the expression).
	knownKey = regexp.MustCompile(`(?i)\b(?:` +
		`sk-(?:ant-|proj-)?[a-z0-9_\-]{16,}` + // OpenAI, Anthropic
		`|(?:sk|pk|rk)_(?:live|test)_[a-z0-9]{16,}` + // Stripe
		`|gh[pousr]_[a-z0-9]{30,}|github_pat_[a-z0-9_]{30,}` + // GitHub
		`|xox[abprs]-[a-z0-9\-]{10,}` + // Slack
		`|AKIA[0-9A-Z]{16}|AIza[0-9a-z_\-]{35}|hf_[a-z0-9]{30,}|glpat-[a-z0-9_\-]{20,}` +
		`|eyJ[a-z0-9_\-]+\.eyJ[a-z0-9_\-]+\.[a-z0-9_\-]*` + // JWT
		`)`)
	bearer   = regexp.MustCompile(`(?i)\b(bearer|token|api[_-]?key|secret|password)(\s*[:=]\s*|\s+)("?)[^\s"']{8,}`)
	longTok  = regexp.MustCompile(`[A-Za-z0-9_\-+/=]{24,}`)
	email    = regexp.MustCompile(`(?i)[a-z0-9._%+\-]+@[a-z0-9\-]+(?:\.[a-z0-9\-]+)*\.[a-z]{2,}`)
	cardLike = regexp.MustCompile(`\b\d(?:[ \-]?\d){12,18}\b`)
	// A phone number: an optional +country code, an optional area code
	// in parentheses, then groups of digits with separators; 8 to 15
	// digits in all (checked in phoneDigits). A bare run of digits is not
	// one unless it starts with +: numbers in text are mostly not phones.
	isoDate   = regexp.MustCompile(`^\d{4}[\-./]\d{1,2}[\-./]\d{1,2}$`)
	phoneLike = regexp.MustCompile(`(?:\+\d{1,3}[ \-.]?)?(?:\(\d{1,5}\)[ \-.]?)?\d{2,5}(?:[ \-.]\d{2,5}){1,4}|\+\d{8,15}`)
)

// Redact replaces e-mail addresses, phone and card-like numbers, and
// API-key-like strings in s with placeholders (Email, Phone, Card, Key).
//
// One pass over s first finds what could be there (an @, a run of
// digits, a long token, a word that introduces a secret), and only those
// expressions run: most prompts hold none of them, and the expressions
// cost a hundred times the pass (1.4M instructions a 300-byte prompt for
// all of them, by bench/icount.sh on BenchmarkSampling).
func Redact(s string) string { return redact(s, scan(s)) }

// redact runs the expressions c says could match.
func redact(s string, c clues) string {
	if c.token >= 12 || c.jwt { // the shortest known key is 15 characters
		s = knownKey.ReplaceAllString(s, Key)
	}
	if c.secretWord {
		s = bearer.ReplaceAllString(s, "${1}${2}${3}"+Key)
	}
	if c.token >= 24 {
		s = longTok.ReplaceAllStringFunc(s, func(t string) string {
			if mixed(t) {
				return Key
			}
			return t
		})
	}
	if c.at {
		s = email.ReplaceAllString(s, Email)
	}
	if c.digits >= 8 {
		// Numbers with a + or an area code in parentheses are phones
		// before they are cards (+4915112345678 has a card's length).
		s = redactPhones(s, true)
		s = cardLike.ReplaceAllString(s, Card)
		s = redactPhones(s, false)
	}
	return s
}

// clues are what one pass finds of what Redact looks for.
type clues struct {
	at         bool // an @
	digits     int  // the most digits in a run of digits and separators
	token      int  // the longest run of key characters
	secretWord bool // bearer, token, key, secret or password, in any case
	jwt        bool // eyJ, how a JWT starts
}

func scan(s string) clues {
	var c clues
	digits, token := 0, 0
	for i := 0; i < len(s); i++ {
		b := s[i]
		letter := b|0x20 >= 'a' && b|0x20 <= 'z'
		digit := b >= '0' && b <= '9'
		// A run of what longTok and the key patterns take.
		if letter || digit || b == '_' || b == '-' || b == '+' || b == '/' || b == '=' {
			token++
		} else {
			token = 0
		}
		// A run of digits and what separates a number's groups.
		switch {
		case digit:
			digits++
		case b == ' ' || b == '-' || b == '.' || b == '(' || b == ')' || b == '+':
		default:
			digits = 0
		}
		if b == '@' {
			c.at = true
		}
		if letter && !c.secretWord && (i == 0 || !wordByte(s[i-1])) {
			c.secretWord = secretAt(s[i:])
		}
		c.digits = max(c.digits, digits)
		c.token = max(c.token, token)
	}
	c.jwt = strings.Contains(s, "eyJ")
	return c
}

// secretAt reports whether s starts with a word the bearer expression
// looks for.
func secretAt(s string) bool {
	var words []string
	switch s[0] | 0x20 {
	case 'a':
		words = []string{"api_key", "api-key", "apikey"}
	case 'b':
		words = []string{"bearer"}
	case 'p':
		words = []string{"password"}
	case 's':
		words = []string{"secret"}
	case 't':
		words = []string{"token"}
	}
	for _, w := range words {
		if len(s) >= len(w) && strings.EqualFold(s[:len(w)], w) {
			return true
		}
	}
	return false
}

// wordByte is what \b counts as part of a word.
func wordByte(b byte) bool {
	return b|0x20 >= 'a' && b|0x20 <= 'z' || b >= '0' && b <= '9' || b == '_'
}

func redactPhones(s string, marked bool) string {
	return phoneLike.ReplaceAllStringFunc(s, func(t string) string {
		if marked != (t[0] == '+' || t[0] == '(') {
			return t
		}
		if n := digits(t); n >= 8 && n <= 15 && phoneShaped(t) {
			return Phone
		}
		return t
	})
}

// mixed reports whether a long token looks like a secret: at least two
// digits and two letters (a long word or a long number is not one).
func mixed(t string) bool {
	var d, l int
	for i := 0; i < len(t); i++ {
		switch c := t[i]; {
		case c >= '0' && c <= '9':
			d++
		case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			l++
		}
	}
	return d >= 2 && l >= 2
}

func digits(t string) int {
	n := 0
	for i := 0; i < len(t); i++ {
		if t[i] >= '0' && t[i] <= '9' {
			n++
		}
	}
	return n
}

// phoneShaped keeps decimals and dates out: a match separated only by
// dots needs three groups or more (555.123.4567, not 3.14159), and one of
// two groups only by a space or a hyphen needs a + or a parenthesis
// (2024-01-15 has three groups but only 8 digits; 1234 5678 is a count).
func phoneShaped(t string) bool {
	if isoDate.MatchString(t) {
		return false
	}
	if strings.HasPrefix(t, "+") || strings.Contains(t, "(") {
		return true
	}
	groups := 1 + strings.Count(t, " ") + strings.Count(t, "-") + strings.Count(t, ".")
	return groups >= 3
}
