"""satpoint.cli"""
