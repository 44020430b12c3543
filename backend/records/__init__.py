"""The run's records that engines, runs, alerts and pages share: below all of them."""
