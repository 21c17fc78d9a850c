"""The one error a declaration the machinery cannot serve raises, wherever it is declared."""


class DeclarationError(ValueError):
    """A declaration the machinery cannot build from: one line naming the pipeline, the table or source, and why."""
