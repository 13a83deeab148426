"""satpoint.analysis"""
