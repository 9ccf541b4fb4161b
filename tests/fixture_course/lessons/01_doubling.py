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
#     title: Doubling
#     fix: multiply by two
#     questions: ["How do you double?"]
#     objectives: [Double.]
#     prerequisites:
#       lessons: [basics]
#     minutes: {teaching: 5, exercises: 5}
#     keypoints: [Doubling is multiplying by two.]
#     instructor_notes: [None.]
# ---

# %% [markdown]
# # Doubling

# %%
import jitlab

jitlab.intro()

# %%
jitlab.outro()
