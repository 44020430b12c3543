"""What draws: the console's Streamlit side (login gate, session state, shared widgets, live charts,
forms and host checks drawn). The logic these call lives one level up, in ``console``, which never
imports Streamlit nor this package (tests/unit/test_layering.py)."""
