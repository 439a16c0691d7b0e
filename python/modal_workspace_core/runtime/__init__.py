"""The runtime every operation shares, one module per job: the call context (`call`).

Nothing is re-exported here: `call` is a leaf that the drivers import, and importing this package
must not pull in anything heavier on the way.
"""
