"""A JAX training loop on cntkio.jax.JaxIterator: fixed-shape batches (few compiled programs), masks, JSON state.

The iterator pads each minibatch's sequences and steps to power-of-two sizes, so a jitted step compiles once per
shape and a sweep needs only a handful of shapes. In a multi-process job (``jax.distributed``) each process reads
its own partition (``jax.process_index()`` of ``jax.process_count()``); here there is one process. Run from the
repository root: ``python examples/jax_loop.py``.
"""
# requires: jax

from __future__ import annotations

import functools
import json

import jax
import jax.numpy as jnp

from cntkio import CTFDeserializer, MinibatchSource, StreamDef, StreamDefs
from cntkio.jax import JaxIterator


def make_source(path: str) -> MinibatchSource:
    streams = StreamDefs(
        features=StreamDef(field="features", shape=3), labels=StreamDef(field="label", shape=4, is_sparse=True)
    )
    return MinibatchSource(CTFDeserializer(path, streams), randomization_seed=2, max_sweeps=1)


@jax.jit
def step(weights: jax.Array, batch: dict) -> tuple[jax.Array, jax.Array]:
    def loss_of(w: jax.Array) -> jax.Array:
        mask = batch["mask"]["features"]  # bool [B, T]: real steps
        mean = (batch["features"] * mask[..., None]).sum(1) / jnp.maximum(mask.sum(1, keepdims=True), 1)
        logp = jax.nn.log_softmax(mean @ w)
        picked = jnp.take_along_axis(logp, batch["labels"][:, None], axis=1)[:, 0]
        real = batch["mask"]["labels"]  # bool [B]: real sequences (the rest pads B to its bucket)
        return -(picked * real).sum() / jnp.maximum(real.sum(), 1)

    loss, grad = jax.value_and_grad(loss_of)(weights)
    return weights - 0.2 * grad, loss


batches = JaxIterator(functools.partial(make_source, "examples/data/sequences.ctf"), 16,
                      layout={"features": "padded", "labels": "per_sequence"})  # fmt: skip
weights = jnp.zeros((3, 4))
shapes = set()
for epoch in range(10):  # each `for` over the iterator reads the next, reshuffled epoch
    for batch in batches:
        shapes.add(batch["features"].shape)
        weights, loss = step(weights, batch)
    if epoch % 3 == 0:
        print(f"epoch {epoch}: loss of the last batch {float(loss):.3f}")
print("shapes compiled:", sorted(shapes))

# Resume: the state after the last batch delivered, as JSON; set_state() on a new iterator continues after it.
make = functools.partial(make_source, "examples/data/sequences.ctf")
layout = {"features": "padded", "labels": "per_sequence"}
first = JaxIterator(make, 16, layout=layout)
seen = []
for batch in first:
    seen.append(batch.sequence_keys)  # (source, key) of each real row
    if len(seen) == 2:
        break  # (a loop left early: the state is right after the second batch)
state = json.dumps(first.get_state())
resumed = JaxIterator(make, 16, layout=layout)
resumed.set_state(json.loads(state))
rest = [batch.sequence_keys for batch in resumed]
whole = JaxIterator(make, 16, layout=layout)
print(f"state: {len(state)} bytes of JSON; resumed run = uninterrupted run:",
      seen + rest == [batch.sequence_keys for batch in whole])  # fmt: skip
