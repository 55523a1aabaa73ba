"""Research experiments and the analyses of their runs: transfer_experiment (does SkillRise's decoupled credit
teach a policy to carry rules across tasks; its arms against their controls on the transfer probe),
decisive_experiment (the pre-registered comparison over RL seeds on the test panel, built on transfer_experiment),
reading_probe (can a model learn to read a document of several rules), documents_by_position and paired_positions
(what a transfer_experiment work dir's documents hold, and paired per-sequence differences between its rows) and
gigpo_anchors (how often GiGPO's anchor states repeat across trials); rulebook_ceilings and panel_overlap
write results files computed exactly (the probe's ceilings; what the dev and test panels share), each with a
--check (computed_json). Importable as modules
(`from benchmarks.experiments import transfer_experiment`); results under benchmarks/results/.
"""
