"""What each institution runs: Flower ClientApp (``client.app:app``) with role handlers.

A ``hospital`` verifies the signed encoder, encodes its table and contributes (T(x), L(x));
the ``audit`` node plays the adversary on public data. ``config`` reads the node's own facts from
``node_config``, ``handlers`` does the work, ``downstream`` trains the task model locally for
FedAvg. Never imports ``server/``.
"""
