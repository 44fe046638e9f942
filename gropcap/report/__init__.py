"""Report layer: finished results (an Analysis, a streamed result, their summary dicts) ->
tables, summaries, text for people; it does not know how they were computed."""
