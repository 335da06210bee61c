"""Remote samplers on a Ray cluster: sampling spreads over other machines, everything else stays here.

- :mod:`~spreeze_like.remote.worker`: :class:`RemoteSampler`, the body of a remote sampler actor
  (the same :class:`~spreeze_like.roles.sampler.SamplerWorker` as a local sampler, with in-process ports).
- :mod:`~spreeze_like.remote.sizing`: rows per collect call.
- :mod:`~spreeze_like.remote.bridge`: the bridge's scheduling (pacing, weights, faults), over a
  small cluster interface (:mod:`~spreeze_like.remote.slots`, with the per-sampler bookkeeping) so
  that it is tested without Ray.
- :mod:`~spreeze_like.remote.info_file`: ``remote_samplers.json``, the bridge's view of its samplers
  for people and tools (written by the bridge, read by the monitor and the supervisor).
- :mod:`~spreeze_like.remote.ray_handles`: that interface over Ray (the only module that imports ray).

The process that runs the bridge is :mod:`spreeze_like.procs.ray_bridge_proc`. Nothing in this package
imports ray or torch at import time.
"""
