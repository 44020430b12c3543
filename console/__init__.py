"""Streamlit glue for the training console: session state, cached backend handles, and pure plotly
figure builders (``console.figures``). Pages import from here; ``backend`` never imports this."""
