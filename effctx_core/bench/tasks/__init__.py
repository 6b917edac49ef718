"""Long-context retrieval tasks beyond the passkey, RULER-style: each family makes its
prompts offline from a seed, at a target length and needle depth, and scores an answer
by exact match against the values the prompt hid.

A family's prompts at one length share their haystack (the same filler or natural text
for every depth and seed), so a trial shares everything before its first needle with
every trial whose needles sit deeper: the trial runner prefills that part once.
"""
