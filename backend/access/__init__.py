"""Who acts, what they may do, and the record of what they did: below the runs, the engines and every front."""
