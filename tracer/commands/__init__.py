"""`schedscope`'s built-in commands, grouped by what they do; their arguments are `arguments`."""
