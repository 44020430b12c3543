"""The training console over ``backend``: pure logic here (forms, actions, figures, chart feeds, the
login token, the run registry), with no Streamlit; ``console.ui`` draws with it, and the pages in
../pages use both. Imports flow pages -> console.ui -> console -> backend; backend never imports this."""
