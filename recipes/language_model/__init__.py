"""The language-model recipe: `rnnkit run language_model` (see README.md here)."""
