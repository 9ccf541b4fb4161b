# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
#   jitlab:
#     title: Basics
#     fix: nothing yet
#     questions: ["What does a fixture lesson do?"]
#     objectives: [Run quickly.]
#     prerequisites:
#       other: [Nothing]
#     minutes: {teaching: 5, exercises: 0}
#     keypoints: [Fixtures are small.]
#     instructor_notes: [None.]
# ---

# %% [markdown]
# # Basics

# %%
import jitlab

jitlab.intro()

# %%
import jax
import jax.numpy as jnp


@jax.jit
def fixture_add_one(x):
    return x + 1


with jitlab.count_compiles(fixture_add_one) as n:
    fixture_add_one(jnp.ones(3))
    fixture_add_one(jnp.ones(4))
print("TRACING CACHE MISS printed by the lesson\n  second line")
jitlab.record("two shapes", compiles=n.compiles)
assert n.compiles == 2

# %%
jitlab.outro()
