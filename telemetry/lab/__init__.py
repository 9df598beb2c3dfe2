"""The impairment lab: labelled captures of LLM-like gRPC traffic with known causes.

Three network namespaces (client, bridge, server) joined by veth pairs; a user-space
AF_PACKET bridge impairs frames per direction on a schedule; a grpcio server behaves like
an LLM server; a Poisson load generator records the client-side truth; tcpdump captures at
the server's veth. See ``runner.py`` for a run's steps and outputs and ``scenarios.py``
for what each scenario injects.
"""
