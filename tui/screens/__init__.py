"""Screens: main (one trace), compare (two traces), help, prompt, error."""
