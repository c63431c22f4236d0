"""E31 Network node agent.

Runs on each GPU host, talks to the site over HTTP+JSON only (see
``docs/agent-protocol.md``) and holds no credential but its node token.
"""

__version__ = "0.4.0"
