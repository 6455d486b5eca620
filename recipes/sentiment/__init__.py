"""The sentiment recipe: `rnnkit run sentiment` (see README.md beside this file)."""
