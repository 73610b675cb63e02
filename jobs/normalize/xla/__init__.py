"""torch_xla / JAX profiles: ``*.xplane.pb`` → Chrome trace (offline, with ``xprof``) → the Kineto parser.

Without ``xprof`` the file is cataloged with the reason, never lost.
"""
