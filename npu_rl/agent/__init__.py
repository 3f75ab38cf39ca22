"""An agentic run's own parts: the code tool verl's tool agent loop calls, and the stop when its sandbox is down.

- ``outage``: every tool call failing for a set time (the sandbox is down) stops the run, with one line;
- ``tool_config``: verl's tool configuration file, written from the recipe;
- ``code_tool``: the code interpreter, a verl 0.9 tool that runs the policy's code in npu-rl's sandbox
  (or any SandboxFusion) and hands back what it printed, or why it did not run, as the tool's answer.

Only ``code_tool`` loads verl, in the rollout's agent loop workers.
"""
