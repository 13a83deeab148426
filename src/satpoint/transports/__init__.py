"""satpoint.transports"""
