"""satpoint.targets"""
