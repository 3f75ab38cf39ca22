"""A service that runs code a policy wrote where it can do no harm (`npu-rl sandbox serve`).

It speaks SandboxFusion's ``/run_code`` (verl's ``reward.sandbox_fusion.url`` and any SandboxFusion client
work against it unchanged), and every execution runs in a bubblewrap jail of its own: see docs/sandbox.md
for the threat model and what each limit answers. The package stands on the project's base alone (no
verl, torch or ray): it runs in a container of its own beside training.

- ``request``: the request and response, as SandboxFusion spells them, and the server's caps;
- ``jail``: the bubblewrap command of one execution, and the check that it can be made here;
- ``execute``: one execution, its limits and its output;
- ``service``: the HTTP service (a bounded queue, counters, a stop that leaves nothing running).
"""
