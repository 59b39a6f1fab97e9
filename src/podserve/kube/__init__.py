"""Kubernetes tooling: one ModelService spec rendered into every object it needs (`render`),
a linter for model-serving pitfalls in any manifests (`lint`), and a doctor that explains a
failing serving pod from its dumps (`doctor`)."""
