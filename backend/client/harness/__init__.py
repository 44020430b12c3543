"""Code that runs on each worker host. Standard library, TensorFlow and Keras only.

The launcher ships this package in every run directory as ``RUN/lib/tfconsole/harness/`` (beside
the client, ``RUN/lib/tfconsole/``), so nothing here may import from ``backend`` outside
``backend.client.harness``; modules import each other relatively (``from . import layout``). A
host runs one as a command of the package's entry, ``python -S RUN/lib COMMAND``
(``layout.host_argv``, ``backend/client/__main__.py``), or as a child of another (``entry.argv``).
"""
