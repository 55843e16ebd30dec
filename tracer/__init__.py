"""schedscope's model layer: recorder, writer, reader and analysis of vLLM scheduler traces.

Importing `tracer` never imports vLLM or any UI library; the vLLM-facing parts
(tracer.scheduler, tracer.record.runner_hook) import vLLM only when vLLM loads them.
"""

__version__ = "0.1.0"
