"""The models opara is developed and benchmarked on, built with random weights."""
