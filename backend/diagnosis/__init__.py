"""What went wrong: diagnosis from logs, training health (NaN/Inf), stacks of a hung run."""
