"""Process roles, one module each: sampler, critic_learner, actor_learner, evaluator, monitor.

Each role is a plain class that is handed its transports (see :mod:`spreeze_like.roles.ports`), so
``--serial`` mode (``spreeze_like.serial``) and the parallel mode (``spreeze_like.supervisor``) run
the same code, one wiring in-process objects and the other shared-memory rings and boards.
"""
