"""The write path's stages, each a module over one `Writing` (context.py): the change's vocabulary (changes.py),
staging its rows and holding them (staging.py), verifying them (verify.py), the watermark's intent (intent.py), the
commits with their threads and fault points (commit.py), and what is recorded of each commit (record.py).
publish.py runs them in order."""
