"""What every domain of operations is built with, and nothing of any domain: the fields inputs
and outputs are made of (`fields`), the bounds per surface (`limits`), the page of a stream's
events (`pages`), the declaration of an operation at its handler (`table`), its run for a
surface (`run`) and an answer fitted to a bound the ways its output declares (`fitting`). A
domain module imports these; none of these imports a domain."""
