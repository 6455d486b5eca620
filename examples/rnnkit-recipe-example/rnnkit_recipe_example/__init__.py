"""An rnnkit recipe in a package of its own (see README.md beside pyproject.toml)."""
