"""satpoint.experiments"""
