"""The stock forecasting recipe: `rnnkit run stock` (see README.md in this folder)."""
