"""The translation recipe: `rnnkit run translation` (see README.md in this folder)."""
