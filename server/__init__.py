"""The coordinator: Flower ServerApp (``server.app:app``) and its run phases.

Thin glue over ``shared/``: ``config`` reads the run configuration once, ``exchange`` sends a round
of messages and accounts for every missing reply, ``phases`` holds the run as plain functions,
``release`` writes the run dir, ``downstream`` is the task model, ``dataplan`` the disjoint splits.
Never imports ``client/``.
"""
