"""Engine parity: this project's environment engines against the stock engines and reference implementations
they replace, and what the engines cost. alfworld_env (ALFWorld reset and step, stock vs ours), scienceworld_env
(ScienceWorld step, reset, JVM start and memory, stock vs ours), scienceworld_memory (the ScienceWorld JVM's
memory over many resets), webshop_env (WebShop build, reset, step and search by catalog size),
webshop_lucene_compare (our WebShop search against Lucene; its oracle is lucene_oracle/LuceneOracle.java) and
webshop_noun_agreement (the offline title-noun fallback against spaCy). Results: benchmarks/results/<name>.json.
"""
