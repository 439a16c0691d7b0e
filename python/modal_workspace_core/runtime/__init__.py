"""The runtime every operation shares, one module per job: the call context (`call`), workspace
records (`records`), agent channels (`channels`), when an exec ends (`exec_end`), last use for
the idle limit (`usage`), background tasks and claims (`tasks`), the allowlists of inputs
(`allowlists`), and `service`, which composes them over one driver.

Nothing is re-exported here: `call` is a leaf that the drivers import, and importing this package
must not pull in `service` (which imports the drivers) on the way.
"""
