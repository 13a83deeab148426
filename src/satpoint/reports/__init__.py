"""satpoint.reports"""
