"""The kit the studies share: options, the run skeleton, records, chunks, summaries, head sets."""
