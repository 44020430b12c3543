"""Code that runs on each worker host. Standard library, TensorFlow and Keras only.

The launcher copies this folder into every run directory, so nothing here may import from
``backend`` outside ``backend.client.harness``; modules import each other as plain siblings
(``import layout``) because on the host they run as scripts from the copied folder.
"""
