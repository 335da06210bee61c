"""Who waits for whom in a parallel run: the update-to-data ratio, kept by counters, not by luck.

The serial mode does exactly ``utd`` critic updates per transition once replay holds
``learn_after = max(batch_size, learning_starts)`` transitions. The parallel mode keeps the same
count with three rules, each a pure function here so that it can be tested alone:

1. **The critic learner waits when ahead of the data**: after ``n`` transitions were inserted
   into replay in this session it may have done :func:`critic_budget` ``(n)`` updates, the serial
   count. So learning per env step matches the serial mode, whatever the relative speeds.
2. **Samplers wait when too far ahead of the learners**: the critic publishes an allowance
   (:func:`data_allowance`) of transitions the samplers may emit in this session: enough for its
   next updates plus ``lead``. A sampler steps only while the samplers' emitted total is below
   it. So the rings and replay never hold more than ``lead`` transitions the learners have not
   had a chance to learn from, and each transition is collected with a policy at most a few
   versions old (the logged ``perf/policy_lag``), however much faster the samplers are. (Ring
   backpressure stays as the safety net: a full ring blocks its writer.)
3. **The critic waits for the actor** when the actor owes more than ``max_actor_lag`` updates
   (:func:`actor_lag`), so the actor:critic ratio stays the algorithm's ``policy_delay`` and the
   critic's copy of the actor stays fresh.

Non-finite transitions that samplers drop are not emitted, so the counts above stay consistent.
"""

from __future__ import annotations

import math
from typing import Any

# Rule 3's bound: the critic may be this many actor updates ahead before it waits. The two updates
# cost about the same, so on average neither waits; the slack absorbs the scheduler's jitter on a
# machine with as many busy processes as cores (with 4 the critic still waited 0.3-5.9 % of its time
# for the actor on 2 cores). Its copy of the actor is then at most this many versions old (logged as
# perf/actor_copy_staleness).
MAX_ACTOR_LAG = 16


def learn_after(batch_size: int, learning_starts: int) -> int:
    """Transitions in replay before the first update (the serial mode's rule)."""
    return max(batch_size, learning_starts)


def session_learn_after(batch_size: int, learning_starts: int, preloaded: int = 0) -> int:
    """This session's transitions before its first update: :func:`learn_after` less the rows a resume loaded
    into replay (``--save-replay``), at least 1. With a full enough saved replay the first new transition
    earns ``utd`` updates, as the serial mode counts (its replay size already holds the loaded rows)."""
    return max(1, learn_after(batch_size, learning_starts) - preloaded)


def critic_budget(inserted: int, start: int, utd: float) -> int:
    """Critic updates allowed after ``inserted`` transitions entered replay in this session.

    Matches the serial loop: once ``start`` transitions are stored, every further transition (and
    the one that reached ``start``) earns ``utd`` updates.
    """
    if inserted < start:
        return 0
    return math.floor(utd * (inserted - start + 1) + 1e-9)


def data_allowance(updates: int, start: int, utd: float, lead: int) -> int:
    """Transitions the samplers may emit in this session after ``updates`` critic updates.

    The data the next update needs (the inverse of :func:`critic_budget`) plus ``lead``.
    """
    return start - 1 + math.ceil((updates + 1) / utd - 1e-9) + lead


def default_lead(samplers: int, envs_per_sampler: int, utd: float = 1.0) -> int:
    """Transitions the samplers may run ahead: a few steps of every env, and the data of a few
    critic updates (at UTD 1/64 one update consumes 64 transitions), at least 64.

    Enough that a sampler never idles while learners have work, small enough that the policy that
    collected a transition is at most a handful of versions old when a learner first sees it.
    """
    return max(64, 4 * samplers * envs_per_sampler, math.ceil(4 / utd - 1e-9))


def resume_gap(lead: int) -> int:
    """Free allowance a waiting sampler needs before it steps again: half the lead.

    Without this hysteresis a sampler at its allowance wakes for every critic update, steps once
    and waits again: about 8 back-off naps per update, whose wake-ups took CPU from the learners
    (in a ``top`` sample a sampler used 19 % of a core at 160 steps/s). Waking once per ``lead / 2`` updates steps a
    burst instead; the critic still holds ``lead / 2`` transitions of budget when the burst starts,
    so it never waits for data because of it.
    """
    return max(1, lead // 2)


def remote_lead(remote_samplers: int, batch_rows: int) -> int:
    """What the lead grows by with remote samplers: each may have two collect calls of ``batch_rows`` in flight.

    The bridge asks an actor for ``n`` rows only while ``allowance - emitted - in flight >= n``, so
    without this a lead of 64 would never admit a batch of 2048; with it, UTD stays exact (rule 1)
    and the remote samplers run ahead by at most their in-flight rows.
    """
    return 2 * max(0, remote_samplers) * max(0, batch_rows)


def ring_capacity(lead: int, envs_per_sampler: int, batch_rows: int = 0) -> int:
    """Records per ring: a power of two above the lead, so pacing (rule 2) binds before backpressure.

    ``batch_rows`` > 0 sizes a remote sampler's ring (local lead, its envs and its collect batch): room
    for two calls in flight plus two replies waiting for the feeder, since the bridge issues a call
    only when the ring has room for all of its in-flight rows.
    """
    need = max(2 * lead, 8 * envs_per_sampler, 256, 4 * batch_rows)
    return 1 << (need - 1).bit_length()


def actor_lag(critic_updates: int, actor_updates: int, policy_delay: int) -> int:
    """Actor updates owed by the actor learner (what ``ActorLearner.updates_due`` computes)."""
    return max(0, critic_updates // policy_delay - actor_updates)


def claimed(sampler_rows: list) -> float:
    """Transitions the samplers have taken of the allowance: emitted (non-finite drops excluded, as they
    never reach replay, and with ``--n-step`` the steps a truncation dropped or a window still holds) plus the
    rows the Ray bridge has asked remote actors for and not yet received. Local samplers and the bridge both
    compare this with the critic's allowance (rule 2). Counting a held step as emitted would let the samplers
    stop short of the data the critic waits for: a deadlock once the drops outgrow the lead. With ``--her-goals``
    the relabelled rows count once made (``her_rows``; the non-finite among them are in ``nonfinite_dropped``),
    never while their episode is held (roles/her.py)."""
    return sum(r.get("env_steps") - r.get("nonfinite_dropped") - r.get("nstep_dropped") - r.get("nstep_pending")
               + r.get("her_rows") + r.get("in_flight") for r in sampler_rows)


def drop_held_steps(row: Any) -> None:
    """A sampler process or remote actor that died took its n-step windows with it (``roles/nstep.py``): the
    steps its row still reports as held become dropped, so :func:`claimed` stays exact. Left as held, every
    restart would add up to (N-1) x envs steps that never become rows, until the samplers stop short of the
    critic's next update for good. Called by whoever starts the row's next writer (the sampler process at
    its start, the Ray bridge when it forgets an actor's calls)."""
    held = row.get("nstep_pending")
    if held:
        row.add("nstep_dropped", held)
        row.set("nstep_pending", 0.0)


def sampler_quotas(remaining: int, samplers: int) -> list[int]:
    """Env steps each sampler takes in this session; they add up to ``remaining`` exactly."""
    base, extra = divmod(max(0, remaining), samplers)
    return [base + (1 if i < extra else 0) for i in range(samplers)]


def reassign_quota(quotas: list[int], abandoned: int, taken: int, receivers: list[int]) -> list[int]:
    """Quotas after sampler row ``abandoned`` was given up having taken ``taken`` env steps.

    Its quota becomes ``taken`` and the remainder is split over the ``receivers`` (row indices) as
    evenly as :func:`sampler_quotas` splits, the first receivers taking the odd steps, so the total
    is unchanged. With no receivers (or nothing left) the quotas are returned unchanged: the caller
    decides what a remainder nobody can take means.
    """
    left = quotas[abandoned] - taken
    receivers = [r for r in receivers if r != abandoned]
    if left <= 0 or not receivers:
        return list(quotas)
    new = list(quotas)
    new[abandoned] = taken
    for row, share in zip(receivers, sampler_quotas(left, len(receivers))):
        new[row] += share
    return new


def backoff_s(failures: int, first_s: float = 1.0, cap_s: float = 30.0) -> float:
    """Delay before restarting a role that died ``failures`` times in a row: 1, 2, 4 ... 30 s."""
    return min(cap_s, first_s * 2 ** max(0, failures - 1))
