"""Trainer tests run torch on one thread, as every spreeze_like process does: on a shared 2-core
machine, OpenMP worker threads that spin while another process holds the core make small matmuls
tens of times slower."""

from __future__ import annotations

import torch

torch.set_num_threads(1)
