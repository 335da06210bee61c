"""The parallel mode's processes, one module per role, and the pieces they share.

The supervisor (``spreeze_like.supervisor``, the main process) creates every shared segment
(:mod:`.segments`), spawns one process per role and watches them:

==========================  =====================================================================
module                      process
==========================  =====================================================================
``sampler_proc``            ``sampler-<i>``: steps envs, writes transitions into its own ring
``critic_learner_proc``     ``critic-learner``: drains every ring into replay (:mod:`.feeder`, the
                            storage's one writer), twin-Q updates at the UTD ratio, priorities
``actor_learner_proc``      ``actor-learner``: policy updates from the same replay (read-only)
``evaluator_proc``          ``evaluator``: deterministic episodes with the newest actor weights
``monitor_proc``            ``monitor``: TensorBoard and the console line from the stats block
==========================  =====================================================================

Shared by all of them: :mod:`.control` (the control words in the stats block, role states, the
child entry point), :mod:`.pacing` (who waits for whom) and :mod:`.parts` (checkpoint parts).
See docs/parallel.md for the data flow, the ownership of every segment and the shutdown order.
"""
