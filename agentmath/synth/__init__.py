"""The data engine: text chain-of-thought -> verified tool trajectories, and the filters around it.

- :mod:`agentmath.synth.pieces`, :mod:`~agentmath.synth.converters`: a converter (rule-based or
  a teacher LLM) plans a trajectory as text and code pieces, with simulated outputs;
- :mod:`agentmath.synth.pipeline`: every snippet runs in one sandbox session, real outputs
  replace simulated ones, and named checks drop what no longer holds (a funnel report says why);
- :mod:`agentmath.synth.tool_records`: a tiny tool model's SFT records in one or several
  formats, verified in the sandbox, with a share left as text (the tool-model recipe's data);
- :mod:`agentmath.synth.decontam`: N-gram, MinHash and embedding detectors for benchmark
  decontamination and near-duplicate removal.
"""
