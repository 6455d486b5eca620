"""The captioning recipe: `rnnkit run captioning` (see README.md in this folder)."""
