"""Built-in rnnkit recipes (installed as the import package `rnnkit_recipes`)."""
