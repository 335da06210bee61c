"""The policy in numpy, for the roles that only act: samplers and the evaluator.

Acting needs a forward pass of a small MLP for a handful of observations. In numpy that is a few
BLAS calls; in torch it is the same calls behind several microseconds of dispatch per op, plus a
second of CPU to import torch in every process that acts. So samplers and the evaluator load the
actor vector from the weight board into a :class:`NumpyPolicy` and never import torch; only the
learners do. Measured: ``tools/bench_sampler.py`` (BENCHMARKS.md, "Trainer").

The vector layout is the actor's ``parameters_to_vector`` order (``algos/networks.py``): each
``nn.Linear`` contributes its weight ``[out, in]`` and then its bias ``[out]``, in module order.

* SAC and CrossQ (:class:`~spreeze_like.algos.networks.SquashedGaussianActor`; CrossQ's actor is
  SAC's, its Batch Renormalization is in the critic only): the trunk's linears
  ``obs -> hidden[0] -> ... -> hidden[-1]`` (ReLU after each), then the ``mean`` head, then the
  ``log_std`` head. Exploring draws ``tanh(mean + std * eps)``; acting deterministically is
  ``tanh(mean)``.
* TD3/DDPG (:class:`~spreeze_like.algos.networks.DeterministicActor`): linears
  ``obs -> hidden ... -> act`` with ReLU between them and tanh at the end. Exploring adds
  ``noise_std * eps`` and clips to ``[-1, 1]``.

``tests/trainer/test_numpy_policy.py`` checks both against the torch modules on the same vector,
``tests/trainer/test_crossq.py`` CrossQ's against its trained actor learner.
"""

from __future__ import annotations

import itertools

import numpy as np

from spreeze_like.algos.spec import LOG_STD_MAX, LOG_STD_MIN, AlgoSpec


class NumpyPolicy:
    """An actor's forward pass over a flat float32 vector. See the module docstring.

    Before the first :meth:`load` every weight is zero, so every action is 0 (the middle of the
    action box); the roles act randomly until they have loaded a published vector anyway.
    """

    def __init__(self, spec: AlgoSpec) -> None:
        self.squashed_gaussian = spec.algo in ("sac", "crossq")  # algos/networks.actor_class
        widths = [spec.obs_dim, *spec.hidden_sizes]
        shapes = [(out, inp) for inp, out in itertools.pairwise(widths)]
        heads = 2 if self.squashed_gaussian else 1  # SAC: mean and log_std; TD3/DDPG: the output layer
        shapes += [(spec.act_dim, widths[-1])] * heads
        self.size = sum(out * inp + out for out, inp in shapes)
        self.vector = np.zeros(self.size, dtype=np.float32)
        # (W^T, b) views into self.vector: loading a new vector is one copy, no re-slicing
        self._layers: list[tuple[np.ndarray, np.ndarray]] = []
        offset = 0
        for out, inp in shapes:
            weight = self.vector[offset : offset + out * inp].reshape(out, inp)
            offset += out * inp
            self._layers.append((weight.T, self.vector[offset : offset + out]))
            offset += out
        self._trunk = self._layers[:-heads]

    def load(self, vector: np.ndarray) -> None:
        """Copy a published actor vector in (never aliases it: the board's memory changes under us)."""
        if vector.shape != (self.size,):
            raise ValueError(f"actor vector has shape {vector.shape}, the policy needs ({self.size},)")
        np.copyto(self.vector, vector)

    def _hidden(self, obs: np.ndarray) -> np.ndarray:
        h = np.asarray(obs, dtype=np.float32)
        for weight_t, bias in self._trunk:
            h = np.maximum(h @ weight_t + bias, 0.0)
        return h

    def _mean_log_std(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        h = self._hidden(obs)
        (mean_w, mean_b), (std_w, std_b) = self._layers[-2:]
        log_std = np.tanh(h @ std_w + std_b)  # the same soft clamp as the torch actor
        return h @ mean_w + mean_b, LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (log_std + 1.0)

    def _deterministic_out(self, obs: np.ndarray) -> np.ndarray:
        weight_t, bias = self._layers[-1]
        return np.tanh(self._hidden(obs) @ weight_t + bias)

    def act_deterministic(self, obs: np.ndarray) -> np.ndarray:
        """The evaluation action ``[B, act_dim]``: ``tanh(mean)`` for SAC, the policy for TD3/DDPG."""
        if self.squashed_gaussian:
            return np.tanh(self._mean_log_std(obs)[0])
        return self._deterministic_out(obs)

    def explore(self, obs: np.ndarray, rng: np.random.Generator, noise_std: float) -> np.ndarray:
        """The sampling action ``[B, act_dim]`` (``noise_std`` is the TD3/DDPG knob; SAC samples its own)."""
        if self.squashed_gaussian:
            mean, log_std = self._mean_log_std(obs)
            eps = rng.standard_normal(mean.shape, dtype=np.float32)
            return np.tanh(mean + np.exp(log_std) * eps)
        action = self._deterministic_out(obs)
        eps = rng.standard_normal(action.shape, dtype=np.float32)
        return np.clip(action + np.float32(noise_std) * eps, -1.0, 1.0)
