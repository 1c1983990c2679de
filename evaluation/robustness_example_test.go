package evaluation_test

import (
	"fmt"
	"math/rand/v2"

	"github.com/triagegw/triage/evaluation"
)

// The noise eval --robustness adds, on one prompt. Robust draws each
// row's noise from a stream of its own, seeded by the run's seed, the
// perturbation's name and the row's index.
func ExamplePerturbations() {
	for _, p := range evaluation.Perturbations() {
		fmt.Printf("%-14s %q\n", p.Name, p.Apply("Is my landlord allowed to keep the deposit?", rand.New(rand.NewPCG(1, 2))))
	}
	// Output:
	// typos          "Is my landlord allowed to kep the deposit?"
	// lowercase      "is my landlord allowed to keep the deposit?"
	// uppercase      "IS MY LANDLORD ALLOWED TO KEEP THE DEPOSIT?"
	// greeting       "Good morning! Is my landlord allowed to keep the deposit?"
	// quick-question "Quick question: Is my landlord allowed to keep the deposit?"
	// sign-off       "Is my landlord allowed to keep the deposit?\n\nThanks in advance!"
	// thanks         "Is my landlord allowed to keep the deposit? thanks"
	// whitespace     "\n\nIs my landlord allowed to keep\tthe deposit?  \n"
}
