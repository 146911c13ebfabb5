"""The transports a round's calls travel: Ray group proxies, rank 0 leading TP followers, a draft socket."""
