package sample

import (
	"strings"
	"testing"
)

func TestRedact(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		// E-mail addresses.
		{"email", "write to jane.doe+news@example.co.uk about it", "write to [email] about it"},
		{"email upper case", "From: JOHN_SMITH@Mail.Example.COM", "From: [email]"},
		// Phone numbers.
		{"phone international", "call me on +44 20 7946 0958 tomorrow", "call me on [phone] tomorrow"},
		{"phone us", "my number is (555) 123-4567.", "my number is [phone]."},
		{"phone dotted", "ring 555.123.4567 now", "ring [phone] now"},
		{"phone bare with plus", "whatsapp +4915112345678", "whatsapp [phone]"},
		// Card-like numbers.
		{"card spaced", "card 4111 1111 1111 1111 exp 12/29", "card [card] exp 12/29"},
		{"card dashed", "it's 5500-0000-0000-0004", "it's [card]"},
		{"card bare", "number 378282246310005 on file", "number [card] on file"},
		// API-key-like strings.
		{"openai key", "my key is sk-proj-abcdefghij0123456789XYZ and it fails", "my key is [key] and it fails"},
		{"anthropic key", "ANTHROPIC_API_KEY=sk-ant-api03-AbCdEf0123456789AbCdEf", "ANTHROPIC_API_KEY=[key]"},
		{"aws key", "aws_access_key_id = AKIAIOSFODNN7EXAMPLE", "aws_access_key_id = [key]"},
		{"github token", "token ghp_0123456789abcdefghijABCDEFGHIJ012345", "token [key]"},
		{"jwt", "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJl", "Authorization: Bearer [key]"},
		{"password", `password="hunter2hunter2"`, `password="[key]"`},
		{"long mixed token", "use a9F3kQ7xZ2mB8vL4nR6tY1wP0 as the secret", "use [key] as the secret"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Redact(tc.in); got != tc.want {
				t.Errorf("Redact(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// TestRedactKeepsText: what is not personal stays as it was, numbers in
// ordinary text included.
func TestRedactKeepsText(t *testing.T) {
	for _, in := range []string{
		"Can my landlord keep my deposit for normal wear and tear?",
		"What is 3.14159 times 2.71828, rounded to 3 places?",
		"In 2024-01-15 we sold 1234 5678 units at 12.50 each",
		"how do I rebase onto main without losing my commits",
		"The internationalization_of_configuration module", // a long word, no digits
		"Find x if 3x + 7 = 22 and y = 10",
		"my email is at the usual place @ home",
	} {
		if got := Redact(in); got != in {
			t.Errorf("Redact(%q) = %q, want it unchanged", in, got)
		}
	}
}

// TestRedactLeavesNothing: whatever is redacted, its digits and the
// address's parts are gone from the output.
func TestRedactLeavesNothing(t *testing.T) {
	in := "jane@example.com, +1 (555) 123-4567, 4111-1111-1111-1111, sk-abcdefghijklmnop0123456789"
	got := Redact(in)
	for _, gone := range []string{"jane", "example.com", "555", "4567", "4111", "sk-", "0123456789"} {
		if strings.Contains(got, gone) {
			t.Errorf("Redact(%q) = %q: %q remains", in, got, gone)
		}
	}
}

func FuzzRedact(f *testing.F) {
	f.Add("write to a@b.co or +1 555 123 4567")
	f.Add("4111 1111 1111 1111")
	f.Add("xoxb-0123456789 and eyJa.eyJb.c with a+b/c=d0123456789012345678901234")
	f.Add("API-KEY: abcdefgh12 Bearer x")
	f.Fuzz(func(t *testing.T, s string) {
		r := Redact(s)
		// Idempotent: a redacted text has nothing more to redact.
		if again := Redact(r); again != r {
			t.Errorf("Redact(Redact(%q)) = %q, want %q", s, again, r)
		}
		// The pass that picks the expressions never skips one that
		// would have matched.
		if all := redact(s, clues{at: true, digits: 99, token: 99, secretWord: true, jwt: true}); all != r {
			t.Errorf("Redact(%q) = %q, but every expression gives %q", s, r, all)
		}
		if email.MatchString(r) {
			t.Errorf("Redact(%q) = %q still holds an e-mail address", s, r)
		}
	})
}
