"""An ML feature pipeline: app events delivered with retries, a user-status dimension, 7-day trailing features,
labels that land weeks late, and a training set joining features and labels by user and day."""
