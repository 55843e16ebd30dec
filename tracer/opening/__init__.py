"""Opening trace inputs: the one way in (`door.open_input`), and how it opens two traces at
once (`open_pair`) and one run's engines in turn (`open_run`). Analysis computes over what is
opened here and opens nothing itself."""
